# The inspect_ai entry point: importing the package registers the swarm agent, its
# controllers and channels, the scripted model and the sandbox providers. inspect_ai logs and
# swallows errors raised here, so everything imported must import cleanly without extras.
from inspect_swarm import swarm  # noqa: F401
from inspect_swarm.sandbox import multidir  # noqa: F401
from inspect_swarm.scripted import scripted_model  # noqa: F401
