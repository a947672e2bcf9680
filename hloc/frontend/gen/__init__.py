"""Generated protobuf modules; regenerate with make proto."""
