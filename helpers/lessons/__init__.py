"""Lesson code that notebooks show and other places reuse, one module per notebook.

Every module here is generated from a notebook's ``#@save`` cells by ``python -m tools.lessons``
(``make lessons``); ``make test`` fails when a module and its notebook differ. Importing this
package imports none of them (they import TensorFlow or Keras).
"""
