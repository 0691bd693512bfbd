"""Model families (issue 40): the interface (:mod:`.interface`), each family's training (:mod:`.bundled`)
and the fitted models the export step loads (:mod:`.models`). Nothing is imported here: importing a
submodule runs this, and the export step must not reach training code."""
