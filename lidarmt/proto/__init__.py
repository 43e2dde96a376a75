"""Apollo's protobuf messages, defined by lidarmt from their public field numbers (no generated code)."""
