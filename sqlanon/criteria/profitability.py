"""Profitability (Wan et al., "A game theoretic framework for analyzing re-identification risk", PLoS ONE 2015; ARX's
ProfitabilityProsecutorNoAttack and ProfitabilityJournalistNoAttack): publish only where no adversary gains by
attacking, under the job's cost/benefit model (`cost_benefit:`, model.quality.CostBenefit)."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..errors import ConfigError
from ..model.quality import ATTACKERS, CostBenefit
from .k_anonymity import KAnonymity
from .risk import KMap


class Profitability(KMap):
    """No attack pays: an adversary's expected payout, adversary_gain times the success probability (1 / the class's
    size) minus adversary_cost, is never positive, so each class holds at least k people, k the least size above
    adversary_gain / adversary_cost (ARX's threshold: CostBenefit.least_unattacked_size). The prosecutor knows
    the person is in the table: k rows of the class (k-anonymity). The journalist does not: k rows of the
    population the published research subset is drawn from (k-map counted in the population, so the job needs a
    `subset:`). Monotone under generalization and suppression, as those are.

    ARX's variants with an attack (the adversary attacks where it pays, and a class is published where the
    publisher's payout stays positive) weigh each class's information loss; sqlanon does not have them yet."""

    name = "profitability"
    population_hint = "or take the prosecutor, who knows the person is in the table: attacker: prosecutor"

    def __init__(self, *, attacker: str, cost_benefit: CostBenefit, attack: bool = False):
        if attacker not in ATTACKERS:
            raise ConfigError(f"{self.name}: attacker must be one of {', '.join(ATTACKERS)}, got {attacker!r}")
        if attack is not False:
            raise ConfigError(
                f"{self.name}: attack: {attack!r} is not supported; only attack: false (no attack may pay off: ARX's "
                "no-attack profitability) is, so far"
            )
        KAnonymity.__init__(self, cost_benefit.least_unattacked_size)
        self.attacker, self.cost_benefit, self.map_k = attacker, cost_benefit, self.k
        # KMap's checks then read it: the journalist's k counted in the population, the prosecutor's in the table
        self.reads_population, self.type_1_error = attacker == "journalist", None
        if self.reads_population:
            self.figure_name = "min_population_size"

    @classmethod
    def from_config(cls, spec: Any) -> Profitability:
        return cls.from_job(spec, CostBenefit())

    @classmethod
    def from_job(cls, spec: Any, cost_benefit: CostBenefit) -> Profitability:
        if not isinstance(spec, dict) or not set(spec) <= {"attacker", "attack"} or "attacker" not in spec:
            raise ConfigError(
                f"{cls.name} takes attacker (prosecutor or journalist) and optionally attack: false, e.g. "
                f"{cls.name}: {{attacker: prosecutor}}; the costs and benefits are the job's cost_benefit:"
            )
        return cls(attacker=spec["attacker"], attack=spec.get("attack", False), cost_benefit=cost_benefit)

    def params(self) -> dict[str, Any]:
        return {"attacker": self.attacker, "attack": False, "k": self.k, **dataclasses.asdict(self.cost_benefit)}

    def guarantee(self) -> str:
        where = "people of the population" if self.reads_population else "records"
        return (
            f"no re-identification pays off for an adversary who gains {self.cost_benefit.adversary_gain:g} and "
            f"spends {self.cost_benefit.adversary_cost:g}: every group matches at least {self.k} {where}"
        )

    def fit_table(self, rows: int) -> None:
        """Nothing to fit: k comes from the cost/benefit model, not from the table's size (unlike KMap's estimate)."""

    def check_table_size(self, rows: int) -> None:
        if not self.reads_population and self.k > rows:
            raise ConfigError(
                f"{self.name}: every class must hold {self.k} records for no attack to pay (adversary_gain / "
                f"adversary_cost = {self.cost_benefit.adversary_gain:g} / {self.cost_benefit.adversary_cost:g}), more "
                f"than the table's {rows} rows; raise cost_benefit.adversary_cost or lower adversary_gain"
            )
