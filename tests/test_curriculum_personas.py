"""Curriculum level 3: every adversarial persona the simulator plays reaches it."""

from __future__ import annotations

import pytest

from tests.helpers_training import level1_records
from training.curriculum import ADVERSARIAL_PERSONAS, level_of
from training.customers.base import PERSONAS


@pytest.mark.parametrize("persona", ["angry", "confused", "terse", "plays_dumb", "adversarial"])
def test_adversarial_personas_are_level_three(world, persona):
    record = level1_records(world, 1, seed=0)[0]
    assert level_of(record) == 1
    assert level_of(dict(record, user_scenario={**record["user_scenario"], "persona": persona})) == 3


def test_every_simulated_persona_but_the_cooperative_one_is_adversarial():
    assert set(PERSONAS) - ADVERSARIAL_PERSONAS == {"polite"}
