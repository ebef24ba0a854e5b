"""The parts of one run of the swarm: the bus, the meter, the observer, the transcript tap, the
budget's enforcement, a member's task and the records. They see the run through protocols."""
