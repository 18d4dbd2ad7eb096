"""The NTP objects of one dataset or one model, end to end: ``ntp analyze`` (:mod:`~embgeo.ntp.analysis.analyze`,
with the certificates it writes, :mod:`~embgeo.ntp.analysis.certificates`) and ``ntp probe``
(:mod:`~embgeo.ntp.analysis.probe`: contexts of a text, a causal LM's hidden states and head, the same objects)."""
