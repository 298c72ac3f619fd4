"""Go's encoding/json and strconv as flannel's formats depend on them.

``core`` is the bounded decoder every document from outside goes through (and the cheap
start-up path of the CNI plugin); ``structs`` folds decoded objects onto Go struct fields on
top of it; ``encode`` is json.Marshal, ``strconv`` the ``%q`` quoting of Go's messages, and
``syntax`` Go's wording of a syntax error. Nothing is imported here, so a module pays only
for the parts it uses.
"""
