"""Measurements of a decoder W (and of the data) against the NTP paper's objects: the alignment metrics of
Theorem 2 (:mod:`~embgeo.ntp.measure.metrics`) and a model's W against W* and W^mm on the rows the data constrain
(:mod:`~embgeo.ntp.measure.alignment`), the logits' structure (:mod:`~embgeo.ntp.measure.geometry`),
the (m, d) phase diagram of Lemma 1 (:mod:`~embgeo.ntp.measure.phase`) and the figures
(:mod:`~embgeo.ntp.measure.figures`)."""
