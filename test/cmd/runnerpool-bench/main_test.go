package main

import "testing"

func TestPartialRunNeverWritesTheCommittedReport(t *testing.T) {
	cases := []struct {
		name     string
		phases   []string
		dir      string
		explicit bool
		want     string
		wantErr  bool
	}{
		{name: "whole run, default", dir: "bench", want: "bench"},
		{name: "whole run, named", dir: "/tmp/r", explicit: true, want: "/tmp/r"},
		{name: "some phases, default", phases: []string{"cache"}, dir: "bench", want: ""},
		{name: "some phases, committed named", phases: []string{"cache"}, dir: "bench", explicit: true, wantErr: true},
		{name: "some phases, committed named with slash", phases: []string{"cache"}, dir: "bench/", explicit: true, wantErr: true},
		{name: "some phases, none", phases: []string{"cache"}, dir: "", explicit: true, want: ""},
		{name: "some phases, elsewhere", phases: []string{"cache"}, dir: "/tmp/r", explicit: true, want: "/tmp/r"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := reportDir(c.phases, c.dir, c.explicit)
			if (err != nil) != c.wantErr {
				t.Fatalf("reportDir(%v, %q, %v) error = %v, want error %v", c.phases, c.dir, c.explicit, err, c.wantErr)
			}
			if got != c.want {
				t.Fatalf("reportDir(%v, %q, %v) = %q, want %q", c.phases, c.dir, c.explicit, got, c.want)
			}
		})
	}
}
