"""The session lifecycle ramakv-proxy and the hooks share: machine, clock, restore wait."""
