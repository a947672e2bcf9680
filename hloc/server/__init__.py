"""The compile server: `hloc compile` served by a warm, resident process (daemon), reached
through a Unix socket before the client imports the compiler (client, protocol)."""
