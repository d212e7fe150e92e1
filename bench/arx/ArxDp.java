import java.io.File;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.deidentifier.arx.ARXAnonymizer;
import org.deidentifier.arx.ARXConfiguration;
import org.deidentifier.arx.ARXConfiguration.SearchStepSemantics;
import org.deidentifier.arx.ARXResult;
import org.deidentifier.arx.AttributeType.Hierarchy;
import org.deidentifier.arx.Data;
import org.deidentifier.arx.DataGeneralizationScheme;
import org.deidentifier.arx.DataGeneralizationScheme.GeneralizationDegree;
import org.deidentifier.arx.criteria.EDDifferentialPrivacy;
import org.deidentifier.arx.dp.ParameterCalculation;
import org.deidentifier.arx.metric.Metric;

/**
 * ARX's (epsilon, delta)-differential privacy on Adult, for bench_dp.py: the 23 cases of ARX's
 * TestAnonymizationDifferentialPrivacy on Adult (the 7 data-independent ones, the 10
 * data-dependent ones whose score is loss, precision, entropy, AECS or discernibility), then its 6 classification
 * ones (QI targets salary-class, and occupation and salary-class; 1, 10 and 100 steps), each RUNS times with ARX's
 * random sampling and exponential mechanism (not its fixed seed), and the k and beta of ARX's ParameterCalculation
 * for a grid of (epsilon, delta), which tests/test_differential_privacy.py holds.
 *
 *   java -cp ARX_CLASSES:. ArxDp ADULT_CSV HIERARCHY_DIR [RUNS [FIRST_CASE]]
 *
 * Prints "k<TAB>epsilon<TAB>delta<TAB>k<TAB>beta" lines, then per case and run "case<TAB>name<TAB>run<TAB>figure
 * <TAB>levels": the figure ARX's test reads (the optimum's highest score: for a fixed generalization, the loss of
 * the release, the geometric mean of ARX's loss per QI; for a search, the chosen node's score).
 */
public class ArxDp {
    static final double LN2 = Math.log(2), LN3 = Math.log(3);

    record Case(String name, double suppression, Metric<?> metric, double epsilon, double delta, GeneralizationDegree degree,
                double budget, int steps, String... targets) {
        ARXConfiguration config() {
            ARXConfiguration config = ARXConfiguration.create(suppression, metric);
            DataGeneralizationScheme scheme = degree == null ? null : DataGeneralizationScheme.create(degree);
            config.addPrivacyModel(new EDDifferentialPrivacy(epsilon, delta, scheme, false));
            if (degree == null) {
                config.setDPSearchBudget(budget);
                config.setHeuristicSearchStepLimit(steps, SearchStepSemantics.EXPANSIONS);
            }
            return config;
        }
    }

    static Case fixed(double suppression, double epsilon, double delta, GeneralizationDegree degree) {
        return new Case("fixed " + degree, suppression, Metric.createLossMetric(), epsilon, delta, degree, 0, 0);
    }

    static Case search(String score, Metric<?> metric, int steps, String... targets) {
        return new Case("search " + score, 1d, metric, 2d, 1e-5d, null, 1d, steps, targets);
    }

    public static void main(String[] args) throws Exception {
        File csv = new File(args[0]);
        File hierarchies = new File(args[1]);
        int runs = args.length > 2 ? Integer.parseInt(args[2]) : 20;
        int first = args.length > 3 ? Integer.parseInt(args[3]) : 0;  // the first case to run (0: the k table too)
        for (double epsilon : new double[] {0.01, 0.1, 0.5, LN2, 1.0, LN3, 1.5, 2.0, 3.0}) {
            for (double delta : new double[] {1e-3, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9}) {
                if (first > 0) {
                    continue;
                }
                ParameterCalculation parameters = new ParameterCalculation(epsilon, delta);
                System.out.printf("k\t%s\t%s\t%d\t%s%n", epsilon, delta, parameters.getK(), parameters.getBeta());
            }
        }
        List<Case> cases = new ArrayList<>(List.of(  // ARX's case numbers 0-5, 18, then 19, 22, 25, ... 46
                fixed(1d, 2d, 1e-5d, GeneralizationDegree.LOW_MEDIUM),
                fixed(1d, 1.5d, 1e-6d, GeneralizationDegree.HIGH),
                fixed(0d, LN2, 1e-7d, GeneralizationDegree.LOW_MEDIUM),
                fixed(0d, LN3, 1e-8d, GeneralizationDegree.MEDIUM),
                fixed(1d, 2d, 1e-5d, GeneralizationDegree.MEDIUM_HIGH),
                fixed(1d, 1.5d, 1e-6d, GeneralizationDegree.LOW_MEDIUM),
                fixed(1d, 0.01d, 1e-9d, GeneralizationDegree.LOW_MEDIUM)));
        for (int steps : new int[] {10, 100}) {
            cases.add(search("loss", Metric.createLossMetric(), steps));
        }
        for (int steps : new int[] {10, 100}) {
            cases.add(search("precision", Metric.createPrecisionMetric(), steps));
        }
        for (int steps : new int[] {10, 100}) {
            cases.add(search("entropy", Metric.createEntropyMetric(), steps));
        }
        for (int steps : new int[] {10, 100}) {
            cases.add(search("aecs", Metric.createAECSMetric(), steps));
        }
        for (int steps : new int[] {10, 100}) {
            cases.add(search("discernibility", Metric.createDiscernabilityMetric(), steps));
        }
        for (String[] targets : new String[][] {{"salary-class"}, {"occupation", "salary-class"}}) {
            for (int steps : new int[] {1, 10, 100}) {
                cases.add(search("classification of " + String.join(" and ", targets), Metric.createClassificationMetric(),
                        steps, targets));
            }
        }
        for (int number = first; number < cases.size(); number++) {
            Case c = cases.get(number);
            String name = c.name() + (c.degree() == null ? " steps=" + c.steps() : " eps=" + c.epsilon());
            for (int run = 0; run < runs; run++) {
                Data data = Data.create(csv, StandardCharsets.UTF_8, ';');
                for (File file : hierarchies.listFiles()) {
                    data.getDefinition().setAttributeType(file.getName().replace(".csv", ""),
                            Hierarchy.create(file, StandardCharsets.UTF_8, ';'));
                }
                for (String target : c.targets()) {
                    data.getDefinition().setResponseVariable(target, true);
                }
                ARXResult result = new ARXAnonymizer().anonymize(data, c.config());
                String figure = result.getGlobalOptimum() == null ? "-"
                        : result.getGlobalOptimum().getHighestScore().toString();
                String levels = result.getGlobalOptimum() == null ? "-"
                        : Arrays.toString(result.getGlobalOptimum().getTransformation());
                System.out.printf("case\t%d\t%s\t%d\t%s\t%s%n", number, name, run, figure, levels);
            }
        }
    }
}
