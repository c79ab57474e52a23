"""kefu.sfu"""
