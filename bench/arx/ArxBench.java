import java.io.File;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Consumer;

import org.deidentifier.arx.ARXAnonymizer;
import org.deidentifier.arx.ARXConfiguration;
import org.deidentifier.arx.ARXPopulationModel;
import org.deidentifier.arx.ARXPopulationModel.Region;
import org.deidentifier.arx.ARXLattice.ARXNode;
import org.deidentifier.arx.ARXResult;
import org.deidentifier.arx.AttributeType;
import org.deidentifier.arx.AttributeType.Hierarchy;
import org.deidentifier.arx.Data;
import org.deidentifier.arx.DataType;
import org.deidentifier.arx.criteria.AverageReidentificationRisk;
import org.deidentifier.arx.criteria.BasicBLikeness;
import org.deidentifier.arx.criteria.DDisclosurePrivacy;
import org.deidentifier.arx.criteria.DistinctLDiversity;
import org.deidentifier.arx.criteria.EnhancedBLikeness;
import org.deidentifier.arx.criteria.EntropyLDiversity;
import org.deidentifier.arx.criteria.EqualDistanceTCloseness;
import org.deidentifier.arx.criteria.HierarchicalDistanceTCloseness;
import org.deidentifier.arx.criteria.KAnonymity;
import org.deidentifier.arx.criteria.KMap;
import org.deidentifier.arx.criteria.KMap.CellSizeEstimator;
import org.deidentifier.arx.criteria.OrderedDistanceTCloseness;
import org.deidentifier.arx.criteria.RecursiveCLDiversity;
import org.deidentifier.arx.criteria.SampleUniqueness;
import org.deidentifier.arx.metric.Metric;

/**
 * ARX's times for the Adult jobs of bench_search.py and bench_criteria.py (and the criteria with 2% suppression),
 * on this machine: the bundled CSV, decompressed, with its hierarchies; Flash (ARX's default), ARX's default loss
 * metric, except in the quality-model jobs ("adult quality": k=5 on the nine QIs, each with one of ARX's quality
 * models, as bench_quality.py publishes; timed only, their lattices are not written).
 *
 *   java -cp ARX_CLASSES:. ArxBench ADULT_CSV HIERARCHY_DIR [REPEAT [LATTICES_TSV]]
 *
 * Prints a tab-separated line per job: its dataset, criteria and suppression limit (as bench_search.py names
 * them), the first run's milliseconds (a cold JVM), the median of REPEAT warm runs, the transformations ARX
 * checked and the optimum's levels (in the CSV's column order). A run is anonymize() alone, from encoding the
 * data to the optimum: the CSV and hierarchies are read before the clock starts.
 *
 * LATTICES_TSV, when given, receives every job's lattice as ARX left it: one line per transformation (dataset,
 * criteria, suppression, levels as attribute=level pairs, ARX's anonymity tag, whether it is the optimum), which
 * compare_arx.py checks sqlanon's answers against.
 */
public class ArxBench {
    static final String OCC = "occupation";
    static final String AGE = "age";

    public static void main(String[] args) throws Exception {
        File csv = new File(args[0]);
        File hierarchies = new File(args[1]);
        int repeat = args.length > 2 ? Integer.parseInt(args[2]) : 15;
        Map<String, Job> jobs = new LinkedHashMap<>();
        jobs.put("adult\tk=5\t0.0", new Job(null, 0d, c -> {}));
        jobs.put("adult\tk=5\t0.02", new Job(null, 0.02d, c -> {}));
        jobs.put("adult\tk=5\t0.1", new Job(null, 0.1d, c -> {}));
        Hierarchy occupation = Hierarchy.create(new File(hierarchies, OCC + ".csv"), StandardCharsets.UTF_8, ';');
        Map<String, Consumer<ARXConfiguration>> criteria = new LinkedHashMap<>();
        criteria.put("distinct l=3", c -> c.addPrivacyModel(new DistinctLDiversity(OCC, 3)));
        criteria.put("entropy l=3", c -> c.addPrivacyModel(new EntropyLDiversity(OCC, 3)));
        criteria.put("entropy l=3 grassberger", c -> c.addPrivacyModel(
                new EntropyLDiversity(OCC, 3, EntropyLDiversity.EntropyEstimator.GRASSBERGER)));
        criteria.put("recursive c=4 l=3", c -> c.addPrivacyModel(new RecursiveCLDiversity(OCC, 4, 3)));
        criteria.put("t equal 0.2", c -> c.addPrivacyModel(new EqualDistanceTCloseness(OCC, 0.2)));
        criteria.put("t hierarchical 0.2",
                c -> c.addPrivacyModel(new HierarchicalDistanceTCloseness(OCC, 0.2, occupation)));
        criteria.put("beta basic 1.0", c -> c.addPrivacyModel(new BasicBLikeness(OCC, 1.0)));
        criteria.put("beta enhanced 3.0", c -> c.addPrivacyModel(new EnhancedBLikeness(OCC, 3.0)));
        criteria.put("delta disclosure 3.0", c -> c.addPrivacyModel(new DDisclosurePrivacy(OCC, 3.0)));
        // occupation is a string: ARX orders its values as strings (String.compareTo)
        criteria.put("t ordered 0.2", c -> c.addPrivacyModel(new OrderedDistanceTCloseness(OCC, 0.2)));
        for (double suppression : new double[] {0d, 0.02d}) {
            jobs.put("adult 8 QIs\tk=5 only\t" + suppression, new Job(OCC, suppression, c -> {}, false));
            for (Map.Entry<String, Consumer<ARXConfiguration>> criterion : criteria.entrySet()) {
                jobs.put("adult 8 QIs\t" + criterion.getKey() + "\t" + suppression,
                        new Job(OCC, suppression, criterion.getValue()));
            }
        }
        for (double suppression : new double[] {0d, 0.02d}) {  // a numeric sensitive attribute: age
            jobs.put("adult 8 QIs, age sensitive\tt ordered 0.2\t" + suppression,
                    new Job(AGE, suppression, c -> c.addPrivacyModel(new OrderedDistanceTCloseness(AGE, 0.2))));
        }
        // the risk models alone (no k-anonymity), on all nine QIs: ARX's TestAnonymizationRiskBased and
        // TestAnonymizationKMap (whose population is Region.USA's)
        Map<String, Consumer<ARXConfiguration>> risks = new LinkedHashMap<>();
        risks.put("average risk 0.01", c -> c.addPrivacyModel(new AverageReidentificationRisk(0.01d)));
        risks.put("average risk 0.05, highest 0.1, at risk 0.05",
                c -> c.addPrivacyModel(new AverageReidentificationRisk(0.05d, 0.1d, 0.05d)));
        risks.put("sample uniqueness 0.01", c -> c.addPrivacyModel(new SampleUniqueness(0.01d)));
        risks.put("k-map 3 zero-truncated", c -> c.addPrivacyModel(new KMap(3, 0.01d,
                ARXPopulationModel.create(Region.USA), CellSizeEstimator.ZERO_TRUNCATED_POISSON)));
        risks.put("k-map 1000 zero-truncated", c -> c.addPrivacyModel(new KMap(1000, 0.01d,
                ARXPopulationModel.create(Region.USA), CellSizeEstimator.ZERO_TRUNCATED_POISSON)));
        risks.put("k-map 1000 poisson", c -> c.addPrivacyModel(new KMap(1000, 0.01d,
                ARXPopulationModel.create(Region.USA), CellSizeEstimator.POISSON)));
        for (double suppression : new double[] {0d, 0.04d}) {
            for (Map.Entry<String, Consumer<ARXConfiguration>> risk : risks.entrySet()) {
                jobs.put("adult\t" + risk.getKey() + "\t" + suppression,
                        new Job(null, suppression, risk.getValue(), true, false));
            }
        }
        // ARX's quality models (bench_quality.py's selections), k=5 on all nine QIs: times only, no lattice
        Map<String, Consumer<ARXConfiguration>> models = new LinkedHashMap<>();
        models.put("non_uniform_entropy", c -> c.setQualityModel(Metric.createPrecomputedEntropyMetric(0.1d, true)));
        models.put("non_uniform_entropy_nm",
                c -> c.setQualityModel(Metric.createPrecomputedEntropyMetric(0.1d, false)));
        models.put("loss (geometric)", c -> c.setQualityModel(Metric.createLossMetric()));
        models.put("aecs", c -> c.setQualityModel(Metric.createAECSMetric()));
        models.put("dm_star", c -> c.setQualityModel(Metric.createDiscernabilityMetric(true)));
        models.put("normalized_entropy", c -> c.setQualityModel(Metric.createNormalizedEntropyMetric()));
        models.put("precision_loss_nm", c -> c.setQualityModel(Metric.createPrecisionMetric()));
        models.put("entropy_loss", c -> c.setQualityModel(Metric.createEntropyBasedInformationLossMetric()));
        models.put("publisher_payout", c -> c.setQualityModel(Metric.createPublisherPayoutMetric(false)));
        for (double suppression : new double[] {0d, 0.04d, 1d}) {
            for (Map.Entry<String, Consumer<ARXConfiguration>> model : models.entrySet()) {
                jobs.put("adult quality\t" + model.getKey() + "\t" + suppression,
                        new Job(null, suppression, model.getValue(), true, true, false));
            }
        }
        PrintWriter lattices = args.length > 3 ? new PrintWriter(args[3], StandardCharsets.UTF_8) : null;
        if (lattices != null) {
            lattices.println("dataset\tcriteria\tsuppression\tnode\tanonymity\toptimum");
        }
        System.out.println("dataset\tcriteria\tsuppression\tcold ms\twarm ms\tchecked\toptimum");
        for (Map.Entry<String, Job> job : jobs.entrySet()) {
            List<Double> times = new ArrayList<>();
            ARXResult result = null;
            for (int i = 0; i <= repeat; i++) {
                Data data = job.getValue().data(csv, hierarchies);
                ARXConfiguration config = job.getValue().config();
                long started = System.nanoTime();
                result = new ARXAnonymizer().anonymize(data, config);
                times.add((System.nanoTime() - started) / 1e6);
            }
            List<Double> warm = new ArrayList<>(times.subList(1, times.size()));
            warm.sort(null);
            System.out.printf("%s\t%.1f\t%.1f\t%d\t%s%n", job.getKey(), times.get(0), warm.get(warm.size() / 2),
                    result.getProcessStatistics().getTransformationsChecked(),
                    result.getGlobalOptimum() == null ? "-"
                            : Arrays.toString(result.getGlobalOptimum().getTransformation()));
            if (lattices != null && job.getValue().tagged()) {
                writeLattice(lattices, job.getKey(), result);
            }
        }
        if (lattices != null) {
            lattices.close();
        }
    }

    static void writeLattice(PrintWriter out, String job, ARXResult result) {
        ARXNode optimum = result.getGlobalOptimum();
        for (ARXNode[] level : result.getLattice().getLevels()) {
            for (ARXNode node : level) {
                String[] attributes = node.getQuasiIdentifyingAttributes();
                int[] levels = node.getTransformation();
                StringBuilder pairs = new StringBuilder();
                for (int i = 0; i < attributes.length; i++) {
                    pairs.append(i == 0 ? "" : ",").append(attributes[i]).append('=').append(levels[i]);
                }
                boolean isOptimum = optimum != null && Arrays.equals(levels, optimum.getTransformation());
                out.printf("%s\t%s\t%s\t%b%n", job, pairs, node.getAnonymity(), isOptimum);
            }
        }
    }

    record Job(String sensitive, double suppression, Consumer<ARXConfiguration> criteria, boolean sensitiveModels,
               boolean kAnonymity, boolean tagged) {
        Job(String sensitive, double suppression, Consumer<ARXConfiguration> criteria) {
            this(sensitive, suppression, criteria, true, true, true);
        }

        Job(String sensitive, double suppression, Consumer<ARXConfiguration> criteria, boolean sensitiveModels) {
            this(sensitive, suppression, criteria, sensitiveModels, true, true);
        }

        Job(String sensitive, double suppression, Consumer<ARXConfiguration> criteria, boolean sensitiveModels,
            boolean kAnonymity) {
            this(sensitive, suppression, criteria, sensitiveModels, kAnonymity, true);
        }

        Data data(File csv, File hierarchies) throws Exception {
            Data data = Data.create(csv, StandardCharsets.UTF_8, ';');
            for (File file : hierarchies.listFiles()) {
                String column = file.getName().replace(".csv", "");
                if (column.equals(sensitive)) {  // sensitive when a criterion reads it, else published as it is
                    data.getDefinition().setAttributeType(column, sensitiveModels
                            ? AttributeType.SENSITIVE_ATTRIBUTE : AttributeType.INSENSITIVE_ATTRIBUTE);
                    if (column.equals(AGE)) {  // ordered by value (the ordered distance)
                        data.getDefinition().setDataType(column, DataType.INTEGER);
                    }
                } else {
                    data.getDefinition().setAttributeType(column, Hierarchy.create(file, StandardCharsets.UTF_8, ';'));
                }
            }
            return data;
        }

        ARXConfiguration config() {
            ARXConfiguration config = ARXConfiguration.create();
            if (kAnonymity) {
                config.addPrivacyModel(new KAnonymity(5));
            }
            config.setSuppressionLimit(suppression);
            criteria.accept(config);
            return config;
        }
    }
}
