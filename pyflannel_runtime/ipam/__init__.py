"""One node's pod addresses: reading host-local's allocations, finding leaks, releasing them."""
