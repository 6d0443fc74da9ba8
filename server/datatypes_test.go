package server

import "testing"

// TestDatatypeTablesAgree: the JSON and binary decoders share one header
// check (inputJSON.header, against datatypes), so every datatype it accepts
// must have a raw size, and the other way round.
func TestDatatypeTablesAgree(t *testing.T) {
	for dt := range datatypes {
		if _, ok := rawSize[dt]; !ok {
			t.Errorf("%s has a range but no raw size", dt)
		}
	}
	for dt := range rawSize {
		if _, ok := datatypes[dt]; !ok {
			t.Errorf("%s has a raw size but no range", dt)
		}
	}
}
