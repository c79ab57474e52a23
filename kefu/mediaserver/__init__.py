"""kefu.mediaserver"""
