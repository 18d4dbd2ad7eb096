"""Training on the NTP loss: GD / NGD / Adam / SGD on a linear decoder (:mod:`~embgeo.ntp.training.train`),
Theorem 1's regularization paths (:mod:`~embgeo.ntp.training.regpath`) and learned embeddings
(:mod:`~embgeo.ntp.training.learned`). Nothing is re-exported here, so that ``embgeo.ntp.training.train`` keeps
meaning the module."""
