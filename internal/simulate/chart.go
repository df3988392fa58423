// The chart of a comparison: demand, the targets and the queue time over the replay, as PNG.
package simulate

import (
	"fmt"
	"image/color"
	"io"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/jobtrace"
)

var (
	blue   = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	orange = color.RGBA{R: 255, G: 127, B: 14, A: 255}
	green  = color.RGBA{R: 44, G: 160, B: 44, A: 255}
	grey   = color.RGBA{R: 127, G: 127, B: 127, A: 255}
)

// Chart writes a PNG of three panels sharing the time axis: jobs arriving per minute (15-minute
// means), the hot targets of the fixed schedule and the autoscaler (and its stopped target), and
// the hourly p95 queue time of both against the goal.
func (c *Comparison) Chart(w io.Writer, jobs []jobtrace.Job, goal time.Duration) error {
	demand := panel("jobs arriving per minute (15-minute mean)", "jobs/min")
	if err := addLine(demand, "demand", grey, arrivals(jobs)); err != nil {
		return err
	}
	targets := panel("targets", "instances")
	hot := func(p Point) float64 { return float64(p.TargetHot) }
	type line struct {
		name string
		col  color.Color
		pts  plotter.XYs
	}
	lines := []line{{"fixed schedule hot", orange, series(c.Fixed, hot)}}
	if c.RunsIgnored != nil {
		lines = append(lines, line{"autoscaler hot, runs ignored", grey, series(c.RunsIgnored, hot)})
	}
	lines = append(lines, line{"autoscaler hot", blue, series(c.Autoscaler, hot)},
		line{"autoscaler stopped", green, series(c.Autoscaler, func(p Point) float64 { return float64(p.TargetStopped) })})
	for _, s := range lines {
		if err := addLine(targets, s.name, s.col, s.pts); err != nil {
			return err
		}
	}
	queue := panel(fmt.Sprintf("queue time p95 per hour (goal %s)", goal), "seconds")
	for _, s := range []struct {
		name string
		col  color.Color
		r    *Result
	}{{"fixed schedule", orange, c.Fixed}, {"autoscaler", blue, c.Autoscaler}} {
		if err := addLine(queue, s.name, s.col, hourlyP95(jobs, s.r)); err != nil {
			return err
		}
	}
	goalLine := plotter.NewFunction(func(float64) float64 { return goal.Seconds() })
	goalLine.Color, goalLine.Dashes = grey, []vg.Length{vg.Points(4), vg.Points(4)}
	queue.Add(goalLine)
	queue.Legend.Add("goal", goalLine)

	const width, height = 30 * vg.Centimeter, 24 * vg.Centimeter
	img := vgimg.New(width, height)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 3, Cols: 1, PadX: vg.Millimeter, PadY: 3 * vg.Millimeter, PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 2 * vg.Millimeter}
	plots := [][]*plot.Plot{{demand}, {targets}, {queue}}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

func panel(title, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = y
	p.X.Tick.Marker = plot.TimeTicks{Format: "Mon 15:04", Ticker: dayTicks{}}
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return p
}

// dayTicks puts a tick at every midnight.
type dayTicks struct{}

func (dayTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	start := time.Unix(int64(lo), 0).UTC().Truncate(24 * time.Hour)
	for t := start; float64(t.Unix()) <= hi; t = t.Add(24 * time.Hour) {
		if float64(t.Unix()) >= lo {
			ticks = append(ticks, plot.Tick{Value: float64(t.Unix()), Label: t.Format("Mon")})
		}
	}
	return ticks
}

func addLine(p *plot.Plot, name string, col color.Color, pts plotter.XYs) error {
	if len(pts) == 0 {
		return nil
	}
	l, err := plotter.NewLine(pts)
	if err != nil {
		return fmt.Errorf("charting %s: %w", name, err)
	}
	l.Color = col
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}

func series(r *Result, v func(Point) float64) plotter.XYs {
	pts := make(plotter.XYs, 0, len(r.Timeline))
	for _, p := range r.Timeline {
		pts = append(pts, plotter.XY{X: float64(p.At.Unix()), Y: v(p)})
	}
	return pts
}

// arrivals is the mean jobs per minute of each quarter-hour.
func arrivals(jobs []jobtrace.Job) plotter.XYs {
	if len(jobs) == 0 {
		return nil
	}
	count := map[int64]int{}
	for _, j := range jobs {
		count[j.Created.Truncate(15*time.Minute).Unix()]++
	}
	var pts plotter.XYs
	for t := jobs[0].Created.Truncate(15 * time.Minute); !t.After(jobs[len(jobs)-1].Created); t = t.Add(15 * time.Minute) {
		pts = append(pts, plotter.XY{X: float64(t.Unix()), Y: float64(count[t.Unix()]) / 15})
	}
	return pts
}

// hourlyP95 is the p95 queue time of the jobs created in each hour.
func hourlyP95(jobs []jobtrace.Job, r *Result) plotter.XYs {
	byHour := map[int64][]time.Duration{}
	for i, j := range jobs {
		h := j.Created.Truncate(time.Hour).Unix()
		byHour[h] = append(byHour[h], r.queue[i])
	}
	hours := make([]int64, 0, len(byHour))
	for h := range byHour {
		hours = append(hours, h)
	}
	slices.Sort(hours)
	pts := make(plotter.XYs, 0, len(hours))
	for _, h := range hours {
		q := byHour[h]
		slices.Sort(q)
		pts = append(pts, plotter.XY{X: float64(h), Y: Percentile(q, 0.95).Seconds()})
	}
	return pts
}
