"""The Redis driver: single node or Redis Cluster, every transition one Lua script."""
