"""cassandra_rtl.golden"""
