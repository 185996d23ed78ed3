"""Loaders: YAML/INI files → the typed model (:mod:`launcher.model`), with positions for errors.

``yamlpos`` (positioned YAML), ``schema`` (nodes → dataclasses), ``recipes`` (the catalog),
``inventory`` (Ansible inventories), ``patterns`` (Ansible host patterns), ``playbook``.
"""
