"""cassandra_rtl.model"""
