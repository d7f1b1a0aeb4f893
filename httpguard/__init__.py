"""Bounds of an HTTP port's connections (caps, timeouts, descriptors), for the node's and the
gateway's aiohttp servers. Imports neither: each gives its own metrics and answers."""
