"""The client side: the `flotilla` command line (`cli`), its REST client (`rest`), contexts file and job files.

Nothing here runs inside the control plane; the services commands start it as a subprocess or
import it in their handlers, so client commands start quickly.
"""
