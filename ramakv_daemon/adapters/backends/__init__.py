"""The cache backends: noop, ascend_ext's memory API, the stock LMCache server (and its
fs L2 folder), and the factory that picks one by the config's `backend`."""
