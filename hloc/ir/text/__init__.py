"""HLO text: the lexer, the parser (parser.py, with parser_attrs.py and parser_values.py for
attributes and values, literal_parse.py for literals) and the printer (printer.py,
printer_attrs.py, literal_text.py for literals), which round-trip: a printed module parses
back to one that prints the same."""
