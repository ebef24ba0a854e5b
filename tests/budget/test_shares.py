import math

import pytest

from inspect_swarm._contracts._budget import Caps, budget_preamble, split_shares


def test_pool_has_no_shares() -> None:
    assert split_shares(100, "pool", 3) is None


@pytest.mark.parametrize(
    ("cap", "split", "n", "expected"),
    [
        (95, "equal", 3, [32.0, 32.0, 31.0]),
        (100, (1.0, 1.0, 2.0), 3, [25.0, 25.0, 50.0]),
        (10, (1.0, 1.0, 1.0), 3, [4.0, 3.0, 3.0]),
        (7, "equal", 1, [7.0]),
    ],
)
def test_token_shares_are_whole_and_sum_to_the_cap(cap, split, n, expected) -> None:
    shares = split_shares(cap, split, n)
    assert shares == expected
    assert sum(shares) == cap


@pytest.mark.parametrize(("cap", "n"), [(1.0, 3), (0.95, 7), (19.0, 6)])
def test_cost_shares_sum_to_the_cap(cap: float, n: int) -> None:
    shares = split_shares(cap, "equal", n)
    assert shares is not None and len(shares) == n
    assert math.isclose(math.fsum(shares), cap, abs_tol=1e-12)
    assert max(shares) - min(shares) <= 1.5e-9  # one nano-dollar apart at most


def test_wrong_number_of_weights() -> None:
    with pytest.raises(ValueError, match="split"):
        split_shares(100, (1.0, 2.0), 3)


def caps(cost=None, tokens=None, token_type="all", time=None) -> Caps:
    return Caps(cost=cost, tokens=tokens, token_type=token_type, time=time)


def test_preamble_without_caps() -> None:
    assert budget_preamble(caps(), "equal", 3, 0) is None
    assert budget_preamble(caps(time=600.0), "pool", 3, 0) == "The swarm stops after 600 seconds."


def test_preamble_pool() -> None:
    text = budget_preamble(caps(cost=19.0, tokens=95_000, time=1710.0), "pool", 4, 0)
    assert text == (
        "The swarm's budget is $19.00 and 95,000 tokens, shared by all 4 members, and any "
        "member may spend all of it. The swarm stops after 1,710 seconds."
    )


def test_preamble_equal_and_weights() -> None:
    equal = budget_preamble(caps(cost=19.0), "equal", 4, 1)
    assert equal is not None and "your share is $4.75" in equal
    assert "not given to the others" in equal
    weighted = budget_preamble(caps(tokens=1000, token_type="output"), (1.0, 1.0, 2.0), 3, 2)
    assert weighted is not None
    assert "budget of 1,000 output tokens is split between its 3 members" in weighted
    assert "your share is 500 output tokens" in weighted


def test_preamble_swarm_of_one() -> None:
    assert budget_preamble(caps(tokens=950), "equal", 1, 0) == (
        "The swarm's budget is 950 tokens, shared by you."
    )
