"""kefu.rtp"""
