# The inspect_ai entry point: importing it registers the swarm agent, its controllers and
# channels, the scripted model and the sandbox providers. The package imports its public names
# on first use, so every one is loaded here, as importing the package once did. inspect_ai logs
# and swallows errors raised here, so everything imported must import cleanly without extras.
import inspect_swarm
from inspect_swarm.sandbox import multidir  # noqa: F401
from inspect_swarm.scripted import scripted_model  # noqa: F401

for _name in inspect_swarm.__all__:
    getattr(inspect_swarm, _name)
