"""cassandra-rtl: bit-exact Cassandra format, RTL, verification, synthesis and model path.

The design card's top-level folders are mapped into this namespace:
golden/ -> cassandra_rtl.golden, hw/ -> cassandra_rtl.hw, tb/ -> cassandra_rtl.tb,
synth/ -> cassandra_rtl.synth, model/ -> cassandra_rtl.model.
"""
__version__ = "0.1.0"
