"""The ranges of the collapse experiments' settings (:mod:`embgeo.lab.settings`)."""

from __future__ import annotations

#: The ranges of the collapse experiments' settings (:mod:`embgeo.lab.settings`), one table for the names they share.
COLLAPSE_CONSTRAINTS: dict[str, tuple[str, float]] = {
    **dict.fromkeys(("epochs", "n_concepts", "words_per_concept", "length", "n_classes", "dim", "n_train_per_class",
                     "batch_size", "log_every", "epochs_hstar"), ("int", 1)),
    **dict.fromkeys(("seed", "n_test_per_class", "starts"), ("int", 0)),  # starts = 0: Theorems G and E(ii) not run
    **dict.fromkeys(("lr", "ln_eps", "tol"), ("positive", 0)),
    **dict.fromkeys(("weight_decay", "weight_decay_W", "weight_decay_U"), ("float", 0)),
}
