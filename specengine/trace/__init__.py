"""Old import paths, kept for code written against them: the IR now lives in `specengine.ir`."""
