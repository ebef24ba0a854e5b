import pytest
from inspect_ai._util.config import parse_cli_args
from pydantic import ValidationError
from pydantic_core import to_jsonable_python

from inspect_swarm._contracts._budget import Budget, check_split


def test_defaults() -> None:
    budget = Budget()
    assert (budget.cost, budget.tokens, budget.time) == (None, None, None)
    assert (budget.reserve, budget.split, budget.grace) == (0.05, "pool", 120.0)


@pytest.mark.parametrize(
    ("field", "value", "fix"),
    [
        ("cost", -1.0, "must be positive"),
        ("cost", 0, "must be positive"),
        ("cost", float("nan"), "positive number of dollars"),
        ("cost", "lots", "positive number of dollars"),
        ("time", -5, "must be positive"),
        ("tokens", -10, "positive whole number"),
        ("tokens", 1.5, "positive whole number"),
        ("tokens", True, "positive whole number"),
        ("tokens", "output:lots", "is not a token limit"),
        ("tokens", "(input*)+output:1m", "is not a token limit"),
        ("reserve", 1.0, "in [0, 1)"),
        ("reserve", -0.1, "in [0, 1)"),
        ("split", "shares", '"pool", "equal" or a tuple'),
        ("split", (1, 0), "not a positive number"),
        ("split", (1, -2), "not a positive number"),
        ("split", (), '"pool", "equal" or a tuple'),
        ("grace", -1, "0 or more seconds"),
        ("grace", float("inf"), "seconds, 0 or more"),
    ],
)
def test_invalid_values_name_the_field_value_and_fix(field: str, value: object, fix: str) -> None:
    with pytest.raises(ValueError) as raised:
        Budget(**{field: value})  # type: ignore[arg-type]
    message = str(raised.value)
    assert f"Budget({field}=...): {field}={value!r}" in message
    assert fix in message


def test_unknown_field_is_refused() -> None:
    with pytest.raises(ValidationError, match="budjet"):
        Budget.model_validate({"budjet": 1})


def test_cli_dict_form() -> None:
    args = parse_cli_args(["budget={time: 600, split: equal}"])
    assert Budget.model_validate(args["budget"]) == Budget(time=600, split="equal")
    args = parse_cli_args(["budget={tokens: 'output:1m', split: [1, 1, 2], cost: 20}"])
    budget = Budget.model_validate(args["budget"])
    assert budget.tokens == "output:1m"
    assert budget.split == (1.0, 1.0, 2.0)
    assert budget.cost == 20.0


def test_frozen() -> None:
    with pytest.raises(ValidationError):
        Budget().cost = 1.0  # type: ignore[misc]


@pytest.mark.parametrize(
    "changed",
    [
        {"cost": 1.0},
        {"tokens": 1000},
        {"tokens": "output:1k"},
        {"time": 60.0},
        {"reserve": 0.1},
        {"split": "equal"},
        {"split": (1, 2)},
        {"grace": 5.0},
    ],
)
def test_budgets_that_differ_in_any_field_log_differently(changed: dict[str, object]) -> None:
    logged = to_jsonable_python(Budget(**changed))  # type: ignore[arg-type]
    assert logged != to_jsonable_python(Budget())
    assert Budget.model_validate(logged) == Budget(**changed)  # type: ignore[arg-type]


def test_weights_must_match_the_roster() -> None:
    check_split((1.0, 2.0), 2)
    check_split("equal", 5)
    with pytest.raises(
        ValueError, match=r"Budget\(split=...\): split=\(1.0, 2.0\) has 2 weights for 3"
    ):
        check_split((1.0, 2.0), 3)
