"""The hierarchy explorer: one self-contained HTML page per image (``hiseg view``), with a
slider over the hierarchy's levels (:mod:`~hiseg.explorer.page`, template ``view_page.html``)."""
