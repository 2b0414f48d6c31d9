"""delayq: a Zaqar v2 compatible message queue with delayed and dead-letter queues."""

__version__ = "0.1.0"
