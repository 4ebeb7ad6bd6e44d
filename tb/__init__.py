"""cassandra_rtl.tb"""
