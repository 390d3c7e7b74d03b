package main

import (
	"math"
	"math/rand/v2"
)

// dataset is a synthetic binary classification problem: points drawn from a Gaussian, labelled by a
// hidden linear rule with noise, so logistic regression can learn it but not perfectly.
type dataset struct {
	x [][]float64
	y []float64
}

// newDataset returns the same for every rank with the same seed; each rank then takes its shard.
func newDataset(samples, features int, seed uint64) dataset {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	truth := make([]float64, features+1)
	for i := range truth {
		truth[i] = rng.NormFloat64() * 2
	}
	d := dataset{x: make([][]float64, samples), y: make([]float64, samples)}
	for i := range d.x {
		x := make([]float64, features)
		for j := range x {
			x[j] = rng.NormFloat64()
		}
		if dot(truth, x)+2*rng.NormFloat64() > 0 {
			d.y[i] = 1
		}
		d.x[i] = x
	}
	return d
}

// shard returns rank's part of the data: every world-th sample, the same count on every rank.
func (d dataset) shard(rank, world int) dataset {
	per := len(d.x) / world
	s := dataset{x: make([][]float64, per), y: make([]float64, per)}
	for i := 0; i < per; i++ {
		s.x[i], s.y[i] = d.x[i*world+rank], d.y[i*world+rank]
	}
	return s
}

// dot returns w·x + bias, where the bias is the last weight.
func dot(w, x []float64) float64 {
	z := w[len(w)-1]
	for j, v := range x {
		z += w[j] * v
	}
	return z
}

func sigmoid(z float64) float64 { return 1 / (1 + math.Exp(-z)) }

// gradient adds the summed log-loss gradient of samples [lo, hi) to g and returns their count.
func (d dataset) gradient(w []float64, lo, hi int, g []float64) float64 {
	for i := lo; i < hi; i++ {
		err := sigmoid(dot(w, d.x[i])) - d.y[i]
		for j, v := range d.x[i] {
			g[j] += err * v
		}
		g[len(g)-1] += err
	}
	return float64(hi - lo)
}

// evaluate returns the summed log loss, the number of correct predictions and the sample count.
func (d dataset) evaluate(w []float64) (loss, correct, n float64) {
	for i, x := range d.x {
		p := math.Min(math.Max(sigmoid(dot(w, x)), 1e-12), 1-1e-12)
		loss -= d.y[i]*math.Log(p) + (1-d.y[i])*math.Log(1-p)
		if (p >= 0.5) == (d.y[i] == 1) {
			correct++
		}
	}
	return loss, correct, float64(len(d.x))
}
