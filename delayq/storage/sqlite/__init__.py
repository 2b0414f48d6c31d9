"""The embedded SQLite driver: one database file, shared by every worker process."""
