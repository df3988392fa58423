// The benchmark's picture: latency histograms drawn with the standard library alone (image, png),
// bars, axes, percentile markers and digit tick labels from a small built-in bitmap font. Titles
// and units are in the Markdown report next to it.
package bench

import (
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"slices"
	"strconv"
)

// Panel is one histogram of the picture.
type Panel struct {
	Samples []float64 // milliseconds
	Color   color.RGBA
}

// Colours of the picture.
var (
	colBackground = color.RGBA{255, 255, 255, 255}
	colAxis       = color.RGBA{60, 60, 60, 255}
	colGrid       = color.RGBA{225, 225, 225, 255}
	colP50        = color.RGBA{20, 20, 20, 255}
	colP99        = color.RGBA{210, 40, 40, 255}
	// ColNotice and ColOverhead are the bars of the two panels of the benchmark.
	ColNotice   = color.RGBA{66, 133, 244, 255}
	ColOverhead = color.RGBA{52, 168, 83, 255}
	ColCold     = color.RGBA{251, 188, 5, 255}
)

const (
	panelW, panelH = 900, 260
	marginL        = 70
	marginR        = 20
	marginT        = 20
	marginB        = 40
	bins           = 40
)

// WritePNG draws the panels one above the other and writes the PNG.
func WritePNG(w io.Writer, panels []Panel) error {
	img := image.NewRGBA(image.Rect(0, 0, panelW, panelH*len(panels)))
	fill(img, img.Bounds(), colBackground)
	for i, p := range panels {
		drawPanel(img, image.Rect(0, i*panelH, panelW, (i+1)*panelH), p)
	}
	return png.Encode(w, img)
}

func drawPanel(img *image.RGBA, r image.Rectangle, p Panel) {
	plot := image.Rect(r.Min.X+marginL, r.Min.Y+marginT, r.Max.X-marginR, r.Max.Y-marginB)
	if len(p.Samples) == 0 {
		line(img, plot.Min.X, plot.Max.Y, plot.Max.X, plot.Max.Y, colAxis)
		return
	}
	s := slices.Sorted(slices.Values(p.Samples))
	// The x range covers everything up to the 99.5th percentile, so one outlier does not squash
	// the shape; what lies beyond is counted in the last bin.
	hi := niceCeil(Percentile(s, 99.5) * 1.05)
	if hi <= 0 {
		hi = 1
	}
	counts := make([]int, bins)
	for _, v := range s {
		b := int(v / hi * bins)
		counts[min(max(b, 0), bins-1)]++
	}
	maxCount := slices.Max(counts)
	// Four grid steps of whole samples.
	yTop := math.Ceil(niceCeil(float64(maxCount))/4) * 4

	// Grid and y ticks.
	for i := 0; i <= 4; i++ {
		y := plot.Max.Y - int(float64(plot.Dy())*float64(i)/4)
		line(img, plot.Min.X, y, plot.Max.X, y, colGrid)
		text(img, plot.Min.X-8, y-5, strconv.Itoa(int(math.Round(yTop*float64(i)/4))), colAxis, alignRight)
	}
	// Bars.
	bw := float64(plot.Dx()) / bins
	for i, c := range counts {
		if c == 0 {
			continue
		}
		h := int(float64(plot.Dy()) * float64(c) / yTop)
		x0 := plot.Min.X + int(float64(i)*bw) + 1
		x1 := plot.Min.X + int(float64(i+1)*bw) - 1
		fill(img, image.Rect(x0, plot.Max.Y-h, max(x1, x0+1), plot.Max.Y), p.Color)
	}
	// Axes and x ticks.
	line(img, plot.Min.X, plot.Min.Y, plot.Min.X, plot.Max.Y, colAxis)
	line(img, plot.Min.X, plot.Max.Y, plot.Max.X, plot.Max.Y, colAxis)
	for i := 0; i <= 5; i++ {
		x := plot.Min.X + int(float64(plot.Dx())*float64(i)/5)
		line(img, x, plot.Max.Y, x, plot.Max.Y+5, colAxis)
		text(img, x, plot.Max.Y+10, formatTick(hi*float64(i)/5), colAxis, alignCenter)
	}
	// Percentile markers: p50 dark, p99 red, each labelled with its value.
	for _, m := range []struct {
		q   float64
		col color.RGBA
		row int
	}{{50, colP50, 0}, {99, colP99, 1}} {
		v := Percentile(s, m.q)
		x := plot.Min.X + int(float64(plot.Dx())*min(v/hi, 1))
		for dx := range 2 {
			line(img, x+dx, plot.Min.Y, x+dx, plot.Max.Y, m.col)
		}
		text(img, x+6, plot.Min.Y+2+m.row*16, formatTick(v), m.col, alignLeft)
	}
}

// Percentile is the q-th percentile (0-100) of sorted values, nearest rank.
func Percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// niceCeil rounds up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 0
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func formatTick(v float64) string {
	switch {
	case v >= 100 || v == math.Trunc(v):
		return strconv.Itoa(int(math.Round(v)))
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	r = r.Intersect(img.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}

func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	if x0 == x1 {
		fill(img, image.Rect(x0, min(y0, y1), x0+1, max(y0, y1)+1), c)
		return
	}
	fill(img, image.Rect(min(x0, x1), y0, max(x0, x1)+1, y0+1), c)
}

// The bitmap font: digits and '.', 3x5 cells drawn at scale 2.
var glyphs = map[rune][5]string{
	'0': {"###", "#.#", "#.#", "#.#", "###"},
	'1': {".#.", "##.", ".#.", ".#.", "###"},
	'2': {"###", "..#", "###", "#..", "###"},
	'3': {"###", "..#", ".##", "..#", "###"},
	'4': {"#.#", "#.#", "###", "..#", "..#"},
	'5': {"###", "#..", "###", "..#", "###"},
	'6': {"###", "#..", "###", "#.#", "###"},
	'7': {"###", "..#", ".#.", ".#.", ".#."},
	'8': {"###", "#.#", "###", "#.#", "###"},
	'9': {"###", "#.#", "###", "..#", "###"},
	'.': {"...", "...", "...", "...", ".#."},
}

const (
	scale   = 2
	advance = 4 * scale
)

type align int

const (
	alignLeft align = iota
	alignCenter
	alignRight
)

func text(img *image.RGBA, x, y int, s string, c color.RGBA, a align) {
	w := len(s)*advance - scale
	switch a {
	case alignCenter:
		x -= w / 2
	case alignRight:
		x -= w
	}
	for _, r := range s {
		g, ok := glyphs[r]
		if ok {
			for gy, row := range g {
				for gx, px := range row {
					if px == '#' {
						fill(img, image.Rect(x+gx*scale, y+gy*scale, x+(gx+1)*scale, y+(gy+1)*scale), c)
					}
				}
			}
		}
		x += advance
	}
}
