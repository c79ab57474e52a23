"""kefu.ai_bridge"""
