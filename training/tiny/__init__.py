"""tiny"""
