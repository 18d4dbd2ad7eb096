"""The NTP objects of one dataset or one model, end to end, as one analysis: :mod:`~embgeo.ntp.analysis.analyze`
(one :class:`~embgeo.ntp.analysis.analyze.Analysis` with one ``to_dict()`` and one ``save()``, and the certificates
it writes, :mod:`~embgeo.ntp.analysis.certificates`) behind both ``ntp analyze`` and ``ntp probe``; a probe
(:mod:`~embgeo.ntp.analysis.probe`) is the contexts of a text + a causal LM's hidden states and head + that
analysis."""
