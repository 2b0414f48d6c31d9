"""The MongoDB driver: a replica set or sharded cluster, every transition single-document
updates whose filters pin the state read."""
