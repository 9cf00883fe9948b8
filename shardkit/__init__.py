"""shardkit."""
