"""The memory labs: leak scenarios and allocator fragmentation."""
