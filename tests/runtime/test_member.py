from typing import Any

import pytest
from inspect_ai.agent import Agent, AgentState, agent, react
from inspect_ai.util import message_limit, token_limit, working_limit

from inspect_swarm import Member, member, swarm
from inspect_swarm._contracts._member import resolve_roster


def names(*records: Member) -> list[str]:
    return [m.name for m in resolve_roster(records)]


class ACPAgent:
    """Stands in for inspect_swe's ACPAgent, which the swarm recognises by its class."""

    async def __call__(self, state: AgentState) -> AgentState:
        return state


@agent
def acp_like() -> Agent:
    return ACPAgent()  # type: ignore[return-value]


def test_default_names_are_numbered_across_the_roster() -> None:
    assert names(member(react, count=6), member(react, args={"model": "x/y"})) == [
        f"react-{i}" for i in range(1, 8)
    ]
    assert names(member(react)) == ["react"]
    assert names(member(react, name="w", count=2), member(react)) == ["w-1", "w-2", "react"]


def test_given_names_are_not_numbered_across_records() -> None:
    with pytest.raises(ValueError, match=r"unique, and \['solver'\] appear more than once"):
        names(member(react, name="solver"), member(react, name="solver"))


def test_the_same_built_agent_cannot_be_in_two_members() -> None:
    shared = react()
    with pytest.raises(ValueError, match="One built agent is one member"):
        swarm([member(shared, name="a"), member(shared, name="b")], channels=[])


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"name": ""}, ValueError, "is empty"),
        ({"name": "a/b"}, ValueError, "contains '/' or '#'"),
        ({"name": "a#b"}, ValueError, "contains '/' or '#'"),
        ({"name": "init"}, ValueError, "is reserved"),
        ({"name": "solvers"}, ValueError, "is reserved"),
        ({"name": "scorers"}, ValueError, "is reserved"),
        ({"count": 0}, ValueError, "count=0 must be a whole number of at least 1"),
        ({"delivery": "push"}, ValueError, "delivery='push' is not a delivery mode"),
        ({"limits": [working_limit(10)]}, ValueError, "working limits are refused"),
        ({"limits": ["tokens"]}, TypeError, "is not an Inspect limit"),
        ({"visible_sandboxes": ["svc"]}, ValueError, "needs sandbox="),
        ({"sandbox": "{member}", "visible_sandboxes": ["default"]}, ValueError, "'default' cannot"),
        ({"args": {"no_such_arg": 1}}, TypeError, "do not fit the signature"),
    ],
)
def test_member_refusals(kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    args = kwargs.pop("args", None)
    with pytest.raises(error, match=message):
        member(react, args, **kwargs)


def test_built_agent_refusals() -> None:
    with pytest.raises(ValueError, match="count=2 needs the factory form"):
        member(react(), count=2)
    with pytest.raises(ValueError, match="given with a built agent"):
        member(react(), {"prompt": "x"})
    with pytest.raises(TypeError, match="neither a built agent nor an @agent factory"):
        member(lambda state: state)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="is an ACP agent"):
        member(acp_like())


def test_args_are_checked_without_calling_the_factory() -> None:
    calls: list[int] = []

    @agent
    def counted(x: int = 0) -> Agent:
        calls.append(x)
        return react()

    record = member(counted, {"x": 3}, count=2)
    assert record.factory is counted and record.args == {"x": 3} and calls == []


def test_member_fields() -> None:
    record = member(
        react,
        {"prompt": "hi"},
        name="w",
        role="solve",
        count=2,
        limits=[token_limit(1000), message_limit(20)],
        bridged=False,
        delivery="poll",
        sandbox="{member}",
        visible_sandboxes=["comparator"],
    )
    assert (record.name, record.role, record.count, record.delivery) == ("w", "solve", 2, "poll")
    roster = resolve_roster([record])
    assert [m.sandbox for m in roster] == ["w-1", "w-2"]
    assert roster[0].delivery == "poll"


def test_logged_form_rebuilds_the_member() -> None:
    record = member(react, {"prompt": "hi"}, name="w", count=2, limits=[token_limit(1000)])
    logged = record.model_dump()
    assert logged == {
        "factory": "inspect_ai/react",
        "args": {"prompt": "hi"},
        "name": "w",
        "count": 2,
        "limits": [{"type": "token", "limit": 1000}],
    }
    from inspect_swarm._contracts._member import member_from_value

    rebuilt = member_from_value(logged)
    assert rebuilt.factory is react and rebuilt.args == {"prompt": "hi"}
    assert rebuilt.limits[0].limit == 1000


def test_cli_dict_form() -> None:
    from inspect_swarm._contracts._member import member_from_value

    record = member_from_value({"factory": "react", "count": 4})
    assert names(record) == ["react-1", "react-2", "react-3", "react-4"]
    with pytest.raises(ValueError, match="no @agent factory is registered as 'nope'"):
        member_from_value({"factory": "nope"})
    with pytest.raises(ValueError, match="unknown member fields \\['colour'\\]"):
        member_from_value({"factory": "react", "colour": "red"})
