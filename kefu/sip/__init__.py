"""kefu.sip"""
