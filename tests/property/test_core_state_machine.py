"""Stateful property test of the replicated core: see tests/property/core_machine.py.

Deterministic for CI (derandomized, no example database); GNOMON_PROPERTY_EXAMPLES raises
the number of examples for a longer hunt.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

from tests.property.core_checks import budget
from tests.property.core_machine import CoreMachine

CoreMachine.TestCase.settings = settings(
    max_examples=budget(100),
    stateful_step_count=50,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestCoreStateMachine = CoreMachine.TestCase
# A pass takes seconds; shrinking a failure of a 50-step machine can take minutes, and a
# pytest timeout would hide the shrunk example (hypothesis itself gives up after 5 minutes).
TestCoreStateMachine.pytestmark = [pytest.mark.timeout(900)]
