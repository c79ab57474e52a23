"""kefu.signaling"""
