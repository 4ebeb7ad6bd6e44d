"""cassandra_rtl.hw"""
