"""The session lifecycle that ramakv-proxy and the framework hooks share: the pure state
machine, the clock its deadlines run on, the bounded wait for a restore to land."""
