"""The compiler's chain: the stage values (`stages`), the functions from one to the next
(`chain`), and what they compute with — lowering, sizing, placement and routing (`flow`), the
placed program over systems (`program`), layers found by structure (`layers`), copies
(`replicas`), flow lanes (`lanes`) and the split over several systems (`partition`).
"""
