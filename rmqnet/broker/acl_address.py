"""The ACL's address patterns, kept here by name for the broker's modules: the code is
:mod:`rmqnet.remoting.acl_address` (the name server's allow list reads them too, a floor below)."""

from ..remoting.acl_address import AclPatternError, Matcher, address_pattern, peer_ip

__all__ = ["AclPatternError", "Matcher", "address_pattern", "peer_ip"]
