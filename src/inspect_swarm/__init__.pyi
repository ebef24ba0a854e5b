"""Run a swarm of agents on one sample of an Inspect task."""

# The public API, for type checkers and IDEs; `__init__.py` imports each name on first use.
from ._channels._filesystem_channel import filesystem
from ._channels._messages import messages
from ._channels._notes import notes
from ._channels._shared_memory import shared_memory
from ._channels._tasks import tasks
from ._contracts._budget import Budget, BudgetUsage, SwarmBudget
from ._contracts._channel import (
    Bus,
    Caller,
    Channel,
    ChannelRun,
    ChannelState,
    NoticeLine,
    StormControls,
    WaitingState,
    WaitNews,
    WaitSpec,
    swarm_channel,
)
from ._contracts._control import (
    Activation,
    AllWaiting,
    MemberEnded,
    MemberHandle,
    ModelCalled,
    Quantum,
    RecordDelivered,
    ScheduledMember,
    SwarmControl,
    SwarmEvent,
    Transform,
    TurnEnded,
)
from ._contracts._controller import Controller, FinalName, StopReason, swarm_controller
from ._contracts._member import Member, member
from ._contracts._record import Draft, Record, Refused
from ._contracts._roster import MemberInfo, MemberState
from ._contracts._work import Assignment, Outstanding, WorkState
from ._controllers._coordinator import coordinator
from ._controllers._leaderless import leaderless
from ._controllers._policies import round_robin, superstep
from ._controllers._quiescence import quiescence
from ._controllers._rounds import rounds
from ._controllers._stops import (
    StopCondition,
    all_of,
    any_of,
    quiescent,
    stall,
    submission,
    verified_pass,
)
from ._controllers._verified import verified
from ._controllers._vote import vote
from ._scores import member_scores
from ._swarm import swarm
from ._tools._bridged import swarm_bridged_tools
from ._tools._channel_tools import swarm_tools
from ._tools._exposure import record_exposure
from ._tools._notice import swarm_on_continue
from ._tools._react import swarm_react
from ._tools._resources import swarm_budget, swarm_resources

__all__ = [
    "Activation",
    "AllWaiting",
    "Assignment",
    "Budget",
    "BudgetUsage",
    "Bus",
    "Caller",
    "Channel",
    "ChannelRun",
    "ChannelState",
    "Controller",
    "Draft",
    "FinalName",
    "Member",
    "MemberEnded",
    "MemberHandle",
    "MemberInfo",
    "MemberState",
    "ModelCalled",
    "NoticeLine",
    "Outstanding",
    "Quantum",
    "Record",
    "RecordDelivered",
    "Refused",
    "ScheduledMember",
    "StopCondition",
    "StopReason",
    "StormControls",
    "SwarmBudget",
    "SwarmControl",
    "SwarmEvent",
    "Transform",
    "TurnEnded",
    "WaitNews",
    "WaitSpec",
    "WaitingState",
    "WorkState",
    "all_of",
    "any_of",
    "coordinator",
    "filesystem",
    "leaderless",
    "member",
    "member_scores",
    "messages",
    "notes",
    "quiescence",
    "quiescent",
    "record_exposure",
    "round_robin",
    "rounds",
    "shared_memory",
    "stall",
    "submission",
    "superstep",
    "swarm",
    "swarm_bridged_tools",
    "swarm_budget",
    "swarm_channel",
    "swarm_controller",
    "swarm_on_continue",
    "swarm_react",
    "swarm_resources",
    "swarm_tools",
    "tasks",
    "verified",
    "verified_pass",
    "vote",
]
