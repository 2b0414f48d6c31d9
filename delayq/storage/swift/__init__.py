"""The Swift driver: an object store without compare-and-swap, made exclusive by
conditional creation of per-message generation markers."""
