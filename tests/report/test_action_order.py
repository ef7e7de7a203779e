"""The order reports give actions in: every action has its place, the most serious first."""

from __future__ import annotations

from validator.model import Action
from validator.report.shared import ACTION_ORDER


def test_every_action_but_none_has_a_place_in_the_order() -> None:
    # An action left out sorts after "run it again", as if it were the least of them.
    assert set(ACTION_ORDER) == set(Action) - {Action.NONE}
    assert len(ACTION_ORDER) == len(set(ACTION_ORDER))


def test_waiting_for_the_gpus_comes_after_the_setup_and_before_measuring_or_a_rerun() -> None:
    # Action lists the least disruptive first; the reports, the most serious first.
    rank = {action: i for i, action in enumerate(ACTION_ORDER)}
    assert rank[Action.FIX_SOFTWARE] < rank[Action.WAIT_IDLE] < rank[Action.MEASURE]
    assert rank[Action.WAIT_IDLE] < rank[Action.RERUN]
    model_order = [a for a in Action if a is not Action.NONE]
    assert list(ACTION_ORDER) == list(reversed(model_order))
