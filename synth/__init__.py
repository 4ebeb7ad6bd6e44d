"""cassandra_rtl.synth"""
